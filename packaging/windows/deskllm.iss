; Inno Setup script: makes dist\deskllm-setup.exe from the frozen folder dist\deskllm
; (packaging\build_windows.ps1 runs PyInstaller, then this). Per-user install into
; %LOCALAPPDATA%\Programs\deskllm without administrator rights (the user may choose an
; all-users install in the dialog), a Start-menu entry, an optional desktop icon and an
; uninstaller. Models and conversations live in the user's data folder and are kept on uninstall.
;     iscc /DAppVersion=0.1.0 packaging\windows\deskllm.iss

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif

[Setup]
AppId={{6B1E2F4A-3C7D-4E59-9A1B-2D8C0F5E7A31}
AppName=deskllm
AppVersion={#AppVersion}
AppVerName=deskllm {#AppVersion}
AppPublisher=deskllm developers
DefaultDirName={autopf}\deskllm
DefaultGroupName=deskllm
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
SourceDir=..\..
OutputDir=dist
OutputBaseFilename=deskllm-setup
SetupIconFile=resources\icons\deskllm.ico
UninstallDisplayIcon={app}\deskllm-gui.exe
UninstallDisplayName=deskllm
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "dist\deskllm\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\deskllm"; Filename: "{app}\deskllm-gui.exe"; Comment: "Chat with language models on this computer"
Name: "{autodesktop}\deskllm"; Filename: "{app}\deskllm-gui.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\deskllm-gui.exe"; Description: "{cm:LaunchProgram,deskllm}"; Flags: nowait postinstall skipifsilent
